"""Text in and out of a model: the tokenizer built from the GGUF's vocabulary, its Jinja chat
template, and the load-time check that both fit the weights.

    tokenizer      TokenizerSpec (the file's tokenizer metadata); GGUFTokenizer, the same ids
                   rebuilt with Hugging Face `tokenizers` without llama.cpp (the app itself
                   tokenizes with llama.cpp's own: `llamacpp.vocab`)
    vocab_rules    llama.cpp's rules by name and text: pre-tokenizers, BOS defaults, EOG tokens
    llama_unicode  llama.cpp's code point classes (generated), for the pre-tokenizer regexes
    special_split  special tokens out of a text, as llama.cpp takes them out
    token_pieces   the bytes each token prints, as llama_token_to_piece
    chat_template  the file's own template, rendered in a sandbox
    consistency    does the tokenizer fit the weights; does the template render
"""
