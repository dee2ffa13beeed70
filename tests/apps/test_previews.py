"""Previews of blobs (issue 21): waveforms of every common WAV encoding, and real thumbnails."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from conch.apps.previews import sniff, wav_samples, waveform
from conch.apps.ui import values
from media_fixtures import photo, png, wav_pcm

ENCODINGS = [8, 16, 24, 32, -32, -64]  # bits of integer PCM; negative: IEEE float


@settings(deadline=None, max_examples=80)
@given(
    st.sampled_from(ENCODINGS),
    st.integers(1, 3),
    st.floats(0.05, 0.95),
    st.booleans(),
    st.sampled_from([110.0, 440.0, 1000.0]),
)
def test_every_wav_encoding_has_its_waveform(
    bits: int, channels: int, peak: float, extensible: bool, freq: float
) -> None:
    """Model: the samples read back are the sine written (to the encoding's precision), and the
    waveform's peak is its amplitude. 24-bit WAV had no waveform, float WAV none either."""
    blob = wav_pcm(freq, bits, seconds=0.05, rate=8000, channels=channels, peak=peak, extensible=extensible)
    frames = wav_samples(blob)
    assert frames is not None and frames.shape == (400, channels)
    t = np.arange(400) / 8000
    want = peak * np.sin(2 * np.pi * freq * t)
    tol = {8: 1 / 100, 16: 1e-4, 24: 1e-6, 32: 1e-8, -32: 1e-6, -64: 1e-12}[bits]
    assert np.allclose(frames[:, 0], want, atol=tol)
    assert np.array_equal(frames[:, 0], frames[:, -1])
    peaks = waveform(blob, points=20)
    assert peaks is not None and peaks.size == 20
    assert abs(float(peaks.max()) - float(np.abs(want).max())) <= tol
    assert sniff(blob).kind == "audio" and "WAV" in sniff(blob).describe()
    assert "<polyline" in values.waveform_svg(blob)


def test_unreadable_wavs_have_no_waveform() -> None:
    blob = wav_pcm(440.0, 16)
    assert waveform(blob.replace(b"fmt ", b"fmx ")) is None  # no format chunk
    adpcm = blob[:20] + (2).to_bytes(2, "little") + blob[22:]  # format 2: MS ADPCM
    assert waveform(adpcm) is None and values.waveform_svg(adpcm) == ""


def test_thumbnails_are_small_cached_and_link_the_full_image() -> None:
    big = photo(3)
    mime, data, w, h = values.thumbnail(big) or ("", b"", 0, 0)
    assert mime == "image/webp" and max(w, h) == values.THUMB_PX and (w, h) == (128, 96)
    assert len(data) < len(big) / 10
    assert Image.open(io.BytesIO(data)).size == (w, h)
    assert values.thumbnail(big)[1] is data  # type: ignore[index]  # computed once
    small = png(1)
    assert values.thumbnail(small) == ("image/png", small, 48, 32)  # already small: itself
    html = values.render({"png": big}, lambda path: f"/blob?col={path}", "image")
    assert 'href="/blob?col=image.png"' in html and "image/webp;base64," in html and len(html) < 12_000
    assert values.thumbnail(big[:200]) is None  # truncated: described, not drawn
    assert "<img" not in values.render_blob(big[:200], "/b")


@pytest.mark.parametrize("fields", [1, 3, 4, 13])
def test_wide_structs_are_grids(fields: int) -> None:
    rec = {f"field_{i}": i * 1.5 for i in range(fields)}
    html = values.render(rec)
    if fields <= values.STRUCT_TABLE_FIELDS:
        assert html.startswith('<table class="nested">') and html.count("<tr>") == fields
    else:
        assert html.startswith('<div class="struct">') and html.count('class="kv"') == fields and "<tr>" not in html
