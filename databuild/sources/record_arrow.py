"""The conversation record (record.py) as Arrow types: the normalised batch every format's adapter
builds and the spill stores (SOURCE_SCHEMA), and which Arrow types a source column may hold a JSON value
in (`json_type_problem`). Apart from record.py, so that what only names the record's values (the
config's data rules, the tokenizer's loader unpickling a config) does not import pyarrow.
"""

from __future__ import annotations

import pyarrow as pa

# A message: role and content, and its other fields (record.EXTRA_FIELDS) as one JSON object text, null
# when it has none; a conversation's tools list as JSON text, null when it has none.
MESSAGE = pa.struct([("content", pa.string()), ("role", pa.string()), ("fields", pa.string())])
SOURCE_SCHEMA = pa.schema([("id", pa.string()), ("messages", pa.list_(MESSAGE)), ("source", pa.string()),
                           ("tools", pa.string())])


# Arrow types whose Python values are JSON values (to_pylist gives str, int, float, bool, list, dict).
def json_type_problem(kind: pa.DataType, where: str) -> str | None:
    """Why values of `kind` are not JSON values (naming the nested field `where`), or None."""
    if (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_boolean(kind)
            or pa.types.is_integer(kind) or pa.types.is_float32(kind) or pa.types.is_float64(kind)
            or pa.types.is_null(kind)):
        return None
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return json_type_problem(kind.value_type, f"{where}[]")
    if pa.types.is_struct(kind):
        for child in kind:
            problem = json_type_problem(child.type, f"{where}.{child.name}")
            if problem is not None:
                return problem
        return None
    if pa.types.is_map(kind):
        return (f"{where} is a parquet map ({kind}), which has no JSON value: store it as JSON text (a string) or as "
                "datasets' Json type")
    if isinstance(kind, pa.JsonType):  # `datasets`' Json: JSON text, read as the value it holds
        return None
    return f"{where} is {kind}, which has no JSON value"
