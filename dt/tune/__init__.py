"""Schedule exploration (issue 31): the space of a program's schedules (`space`); the search,
its cache and `dt tune` are to come."""
from dt.tune.space import Candidate, Space, space  # noqa: F401
