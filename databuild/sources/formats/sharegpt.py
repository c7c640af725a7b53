"""`sharegpt`: a `conversations` column of from/value, with the `from` values real datasets use.

The union of the values open-instruct's, axolotl's and LLaMA-Factory's converters accept for a plain
chat turn (see data/README.md); a value outside it (`function_call`, `observation`, `tool`, a typo)
is refused, naming it, rather than passed to the template to guess.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .messages import MessageColumn

ROLE_OF = {"human": "user", "user": "user", "User": "user",
           "gpt": "assistant", "assistant": "assistant", "Assistant": "assistant", "chatgpt": "assistant",
           "bing": "assistant", "bard": "assistant",
           "system": "system", "developer": "developer"}
FROM_VALUES = pa.array(list(ROLE_OF))
ROLES = pa.array(list(ROLE_OF.values()))


@dataclass(frozen=True)
class ShareGPT(MessageColumn):
    messages: str = "conversations"
    role: str = "from"
    content: str = "value"

    def map_roles(self, roles: pa.Array, offsets: np.ndarray) -> tuple[pa.Array, dict[int, str]]:
        mapped = ROLES.take(pc.index_in(roles, value_set=FROM_VALUES))
        problems: dict[int, str] = {}
        for item in np.flatnonzero(mapped.is_null().to_numpy(zero_copy_only=False)):
            row = int(np.searchsorted(offsets, item, side="right")) - 1
            problems.setdefault(row, f"message {item - offsets[row]}: unknown 'from' value {roles[item].as_py()!r} "
                                     f"(sharegpt knows {', '.join(ROLE_OF)})")
        return pc.coalesce(mapped, roles), problems
