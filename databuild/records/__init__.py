"""The records floor: the types that cross stages, below every stage and imported downward by all.

`origin`: where a conversation came from (stream position, source row, id, source).
`preference`: a preference example (issue 34): the shared prompt and its completions, a pair or one labelled;
`pair`: past the tokenizer, its prompt's ids once and each completion's ids and target mask.
`conversation`: the conversation record and, past the tokenizer, the tokenized conversation.
`problems`: what can happen to a conversation: the problem kinds with their reasons and fixes, the
bad conversation named by source, file, row and id, `on_bad_conversation` applied, the refusals.
`row`: a packed row and its segments, the padding id.

A stage defines only what no other stage consumes (as datatrove keeps its one `Document` in
`data.py`); the record changes type at the tokenizer, as torchtune's does, and each type has one home.
"""
