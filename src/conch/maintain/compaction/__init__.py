"""LSM maintenance (spec/003 "Compaction", DESIGN §6): the policy and its plans (`plan`), key
ranges (`ranges`), executing a task (`rewrite`), displacement maps (`displacement`), and running
and committing compactions (`run`). Time travel across compactions is `conch.log.sinceview`.

Spark (issue 10 item 7) uses `plan_tasks`, `execute` per key range on executors, and one
`commit` on the driver.
"""

from conch.maintain.compaction.plan import CompactionTask, MaintenancePlan, Policy
from conch.maintain.compaction.rewrite import Staged
from conch.maintain.compaction.run import (
    CompactionResult,
    commit,
    compact,
    execute,
    maintenance_plan,
    plan_tasks,
    with_cuts,
)

__all__ = [
    "CompactionResult",
    "CompactionTask",
    "MaintenancePlan",
    "Policy",
    "Staged",
    "commit",
    "compact",
    "execute",
    "maintenance_plan",
    "plan_tasks",
    "with_cuts",
]
