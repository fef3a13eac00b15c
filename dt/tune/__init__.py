"""Schedule exploration (issue 31): the space of a program's schedules (`space`) and a search
over it (`tune`); docs/tuning.md."""
from dt.tune.choose import tuned  # noqa: F401
from dt.tune.search import Result, Timed, tune  # noqa: F401
from dt.tune.space import Candidate, Space, space  # noqa: F401
