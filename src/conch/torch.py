"""PyTorch datasets over Conch scans (needs `conch[torch]`); see `conch.loaders.torch`.

>>> from torch.utils.data import DataLoader  # doctest: +SKIP
>>> loader = DataLoader(conch.torch.dataset(t.scan("x", "y"), shuffle=True), batch_size=64, num_workers=2)  # doctest: +SKIP
"""

from conch.loaders.torch import ConchIterableDataset, ConchMapDataset, dataset, map_dataset, to_tensors

__all__ = ["ConchIterableDataset", "ConchMapDataset", "dataset", "map_dataset", "to_tensors"]
