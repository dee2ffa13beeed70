"""The read path: planning (`plan`), execution (`execute` and one module per step), the result
protocol (`result`) and the user-facing `Scan`; key-range splits (`splits`)."""

from conch.model.budget import ScanOptions
from conch.scan.api import Scan, Split
from conch.scan.metrics import GroupMetrics, ScanMetrics
from conch.scan.result import ScanResult

__all__ = ["GroupMetrics", "Scan", "ScanMetrics", "ScanOptions", "ScanResult", "Split"]
