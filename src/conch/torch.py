"""PyTorch datasets over Conch scans (needs `conch[torch]`); see `conch.loaders.torch`.

>>> from torch.utils.data import DataLoader  # doctest: +SKIP
>>> ds = conch.torch.dataset(t.scan("img", "label"), batch_size=256, decode={"img": conch.torch.decoders.image()})  # doctest: +SKIP
>>> for batch in conch.torch.to_device(DataLoader(ds, batch_size=None, num_workers=8, pin_memory=True), "cuda"): ...  # doctest: +SKIP

`decoders` (`conch.loaders.decoders`): `image()` and `audio()` hooks for `decode=`;
`to_device` (`conch.loaders.device`): batches double-buffered onto a GPU on a side stream.
"""

from conch.loaders import decoders
from conch.loaders.device import DeviceLoader, to_device
from conch.loaders.torch import (
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
