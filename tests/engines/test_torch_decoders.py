"""`conch.engines.torch.decoders` (issue 22): real PNG, JPEG and WAV bytes to tensors, as decode hooks."""

from __future__ import annotations

import io
import pickle
import struct
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import conch
import conch.engines.torch as ct
from conch.engines.torch.decoders import DecodeError


def _encoded(arr: np.ndarray, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt, **kw)
    return buf.getvalue()


def _picture(h: int, w: int, seed: int = 0) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    rgb = np.stack([(xx * 4) % 256, (yy * 4) % 256, np.full((h, w), 40 + seed)], axis=2)
    return rgb.astype(np.uint8)


def test_png_decodes_exactly_to_chw_uint8() -> None:
    pic = _picture(20, 30)
    out = ct.decoders.image()(_encoded(pic, "PNG"))
    assert out.dtype == torch.uint8 and out.shape == (3, 20, 30)
    assert torch.equal(out, torch.from_numpy(pic).permute(2, 0, 1))
    gray = ct.decoders.image(mode=None)(_encoded(pic[:, :, 0], "PNG"))
    assert gray.shape == (1, 20, 30) and torch.equal(gray[0], torch.from_numpy(pic[:, :, 0]))
    rgb = ct.decoders.image()(_encoded(pic[:, :, 0], "PNG"))  # converted to the mode asked for
    assert rgb.shape == (3, 20, 30) and torch.equal(rgb[1], rgb[0])


def test_jpeg_decodes_close_and_resizes() -> None:
    pic = _picture(64, 96)
    jpg = _encoded(pic, "JPEG", quality=95)
    out = ct.decoders.image()(jpg)
    assert out.shape == (3, 64, 96)
    assert (out.int() - torch.from_numpy(pic).permute(2, 0, 1).int()).abs().float().mean() < 4  # lossy
    small = ct.decoders.image(size=(16, 24))(jpg)
    assert small.shape == (3, 16, 24) and small.dtype == torch.uint8
    square = ct.decoders.image(size=32)(_encoded(pic, "PNG"))
    assert square.shape == (3, 32, 32)
    want = np.asarray(Image.fromarray(pic).resize((32, 32), Image.Resampling.BILINEAR))
    assert torch.equal(square, torch.from_numpy(want).permute(2, 0, 1))


def test_bad_images_raise_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="cannot decode 9 bytes as an image"):
        ct.decoders.image()(b"not a png")
    with pytest.raises(DecodeError, match="null"):
        ct.decoders.image()(None)
    with pytest.raises(conch.ConchError, match="size"):
        ct.decoders.image(size=(0, 3))


def _wav(samples: np.ndarray, width: int, channels: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(8000)
        w.writeframes(samples.tobytes())
    return buf.getvalue()


def _float_wav(samples: np.ndarray, channels: int, extensible: bool = False) -> bytes:
    bits = samples.dtype.itemsize * 8
    data = samples.astype(samples.dtype.newbyteorder("<")).tobytes()
    align = channels * bits // 8
    if extensible:  # WAVE_FORMAT_EXTENSIBLE whose sub-format GUID starts with 3 (IEEE float)
        guid = struct.pack("<H", 3) + b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        fmt = struct.pack("<HHIIHHHHI", 0xFFFE, channels, 8000, 8000 * align, align, bits, 22, bits, 0) + guid
    else:
        fmt = struct.pack("<HHIIHH", 3, channels, 8000, 8000 * align, align, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def test_wav_pcm_of_every_width_and_float() -> None:
    frames = np.linspace(-0.9, 0.9, 50)
    stereo = np.stack([frames, -frames], axis=1)  # frames × channels, interleaved on disk
    want = torch.from_numpy(stereo.T.astype(np.float32))
    cases = {
        1: (np.round(stereo * 127) + 128).astype(np.uint8),
        2: np.round(stereo * 32767).astype("<i2"),
        4: np.round(stereo * (2**31 - 1)).astype("<i4"),
    }
    for width, pcm in cases.items():
        out = ct.decoders.audio()(_wav(pcm, width, 2))
        assert out.dtype == torch.float32 and out.shape == (2, 50)
        assert torch.allclose(out, want, atol=2.0 / (1 << (8 * width - 1)) + 1e-6), width
    i24 = np.round(stereo * (2**23 - 1)).astype(np.int32).reshape(-1)
    packed = np.stack([i24 & 0xFF, (i24 >> 8) & 0xFF, (i24 >> 16) & 0xFF], axis=1).astype(np.uint8)
    out24 = ct.decoders.audio()(_wav(packed, 3, 2))
    assert torch.allclose(out24, want, atol=1e-6)
    for dt in (np.float32, np.float64):
        assert torch.allclose(ct.decoders.audio()(_float_wav(stereo.astype(dt), 2)), want)
    assert torch.allclose(ct.decoders.audio()(_float_wav(stereo.astype(np.float32), 2, extensible=True)), want)
    mono = ct.decoders.audio(channels_first=False)(_wav(cases[2][:, 0].copy(), 2, 1))
    assert mono.shape == (50, 1)


def test_bad_audio_raises_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="not a RIFF/WAVE"):
        ct.decoders.audio()(b"ID3\x03 an mp3")
    alaw = _wav(np.zeros(4, np.uint8), 1, 1).replace(struct.pack("<HH", 1, 1), struct.pack("<HH", 6, 1), 1)
    with pytest.raises(DecodeError, match="format tag 0x6"):
        ct.decoders.audio()(alaw)


def test_decoders_pickle_and_run_in_workers(tmp_path: Path) -> None:
    pics = [_picture(12, 10, seed=i) for i in range(40)]
    t = conch.connect(tmp_path / "wh").create_table("m", [("id", pa.int64())])
    t.write(
        {
            "id": list(range(40)),
            "png": [_encoded(p, "PNG") for p in pics],
            "wav": [_wav(np.full(8, i * 100, "<i2"), 2, 1) for i in range(40)],
        }
    )
    dec: dict[str, Any] = {"png": ct.decoders.image(), "wav": ct.decoders.audio()}
    assert repr(pickle.loads(pickle.dumps(dec["png"]))) == repr(dec["png"])
    ds = ct.dataset(t.scan("png", "wav"), batch_size=8, decode=dec)
    for method in ("fork", "spawn"):
        batches = list(DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=method))
        assert batches[0]["png"].shape == (8, 3, 12, 10) and batches[0]["wav"].shape == (8, 1, 8)
        for b in batches:
            for j, i in enumerate(b["id"].tolist()):
                assert torch.equal(b["png"][j], torch.from_numpy(pics[i]).permute(2, 0, 1))
                assert b["wav"][j, 0, 0].item() == pytest.approx(i * 100 / 32768)
