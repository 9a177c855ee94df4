"""TokenQuota: the tokens a namespace (a team), or one agent in it, may use per window.

Checked at admission: a spawn whose own token budget does not fit in what the window has
left, after what runs already used and what live runs may still use, is refused. Usage is
summed by the operator from the Workers' reported tokens and kept on the quota's status,
so it outlives the Workers (collected) and the operator (restarted). docs/multitenancy.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, StrictStr

from agentworkers.api.common import KubeModel

Window = Literal["Hour", "Day", "Month"]
# Workers whose tokens the status remembers (their count so far): a bound on its size.
MAX_COUNTED = 5000


class TokenQuotaSpec(KubeModel):
    """How many tokens, per which window, for whom."""

    tokens: StrictInt = Field(
        description="Tokens (prompt and completion) the scope may use per window.",
        ge=1,
    )
    window: Window = Field(
        default="Day",
        description="Hour, Day or Month: a calendar window in UTC (the hour, the day from "
        "00:00, the month from its first day). Usage starts again at 0 when the next begins.",
    )
    agent: StrictStr | None = Field(
        default=None,
        description="Only this agent's runs (spec.agent); omit for every run in the namespace.",
        min_length=1,
        max_length=63,
    )


class TokenQuotaStatus(KubeModel):
    """The current window and what was used in it; written by the operator only."""

    window_start: StrictStr | None = Field(
        default=None, description="When the current window began (UTC, RFC 3339)."
    )
    resets_at: StrictStr | None = Field(
        default=None, description="When the current window ends and usage starts again at 0."
    )
    used: StrictInt = Field(default=0, description="Tokens used in the current window.", ge=0)
    reserved: StrictInt = Field(
        default=0,
        description="Tokens live runs in scope may still use (their budget less what they "
        "used): held against the quota until they end.",
        ge=0,
    )
    remaining: StrictInt | None = Field(
        default=None, description="spec.tokens less used and reserved (at least 0)."
    )
    counted: dict[str, StrictInt] = Field(
        default_factory=dict,
        description="Tokens of each Worker (by uid) already added to `used`, so a report is "
        "counted once; a Worker that is gone is dropped, its tokens stay in `used`.",
        max_length=MAX_COUNTED,
    )
    accounted_at: StrictStr | None = Field(
        default=None, description="When the operator last summed the usage."
    )
