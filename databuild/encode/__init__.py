"""From conversation to tokens: the chat template's render (`render`, through `transformers_private`), the
loss-mask strategies (`strategies/`, one module each, looked up by name) and their spans made token masks
(`masks`), a rendered conversation's targets by the strategy and train_turns (`targets`), assistant turns
by inference (`inference`, `placement`, `turns`), ends of turn (`ends`), a render's time and machine limits
(`render_limit`), and render, tokenize and mask in batches (`encoder`)."""
