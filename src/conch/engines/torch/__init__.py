"""PyTorch datasets over Conch scans (needs `conch[torch]`); see `conch.engines.torch.loader`.

>>> from torch.utils.data import DataLoader  # doctest: +SKIP
>>> ds = conch.engines.torch.dataset(t.scan("img", "label"), batch_size=256, decode={"img": conch.engines.torch.decoders.image()})  # doctest: +SKIP
>>> for batch in conch.engines.torch.to_device(DataLoader(ds, batch_size=None, num_workers=8, pin_memory=True), "cuda"): ...  # doctest: +SKIP

`decoders` (`conch.engines.torch.decoders`): `image()` and `audio()` hooks for `decode=`;
`to_device` (`conch.engines.torch.device`): batches double-buffered onto a GPU on a side stream.
"""

from conch.engines.torch import decoders
from conch.engines.torch.device import DeviceLoader, to_device
from conch.engines.torch.loader import (
    ConchIterableDataset,
    ConchMapDataset,
    dataset,
    default_split_count,
    map_dataset,
    to_tensors,
)

__all__ = [
    "ConchIterableDataset",
    "ConchMapDataset",
    "DeviceLoader",
    "dataset",
    "decoders",
    "default_split_count",
    "map_dataset",
    "to_device",
    "to_tensors",
]
