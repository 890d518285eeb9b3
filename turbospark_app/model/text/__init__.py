"""Text in and out of a model: the tokenizer built from the GGUF's vocabulary, its Jinja chat
template, and the load-time check that both fit the weights.

    tokenizer      GGUFTokenizer (Hugging Face `tokenizers`), BOS/EOS/EOG from the file
    vocab_rules    llama.cpp's rules by name and text: pre-tokenizers, BOS defaults, EOG tokens
    chat_template  the file's own template, rendered in a sandbox
    consistency    does the tokenizer fit the weights; does the template render
"""
