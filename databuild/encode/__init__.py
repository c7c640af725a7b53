"""From conversation to tokens: the chat template render, the loss-mask strategies, tokenization in batches."""
