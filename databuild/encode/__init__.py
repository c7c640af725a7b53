"""From conversation to tokens: the chat template's render (`render`, through `transformers_private`), the
loss-mask strategies (`strategies/`, one module each, looked up by name) and their spans made token masks
(`masks`), assistant turns by inference (`inference`, `placement`, `turns`), ends of turn (`ends`), and
tokenization in batches (`encoder`)."""
