"""The read path: planning (`plan`), execution (`execute`) and the user-facing `Scan`."""

from conch.scan.api import Scan
from conch.scan.execute import ScanMetrics

__all__ = ["Scan", "ScanMetrics"]
