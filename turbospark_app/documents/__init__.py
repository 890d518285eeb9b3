"""Documents: text out of files, chunks, an index (SQLite + FTS5 + float32 vectors), hybrid
retrieval, and the sources a reply is given and shows. May import: model, host (no Qt).

    extract      text out of Markdown, text, code, HTML and PDF (page numbers kept); one clear
                 error per bad file
    pdf_worker   PDFium in a child process with a time limit (not thread-safe; a hostile PDF
                 must not take the app with it)
    chunking     ~500-token chunks split at headings, paragraphs, sentences, with overlap
    store        DocumentStore: collections, documents, chunks, FTS5, vectors in its own
                 SQLite file (not the conversations' store)
    indexer      index a folder or files: skip the unchanged (size + mtime + sha256), one
                 transaction per document (a kill mid-index leaves no half document)
    retrieve     exact cosine in numpy + BM25 from FTS5, fused by reciprocal rank
    sources      attachments whole or retrieved, the numbered sources of a prompt, the
                 Sources list under a reply
    service      collections indexed on a background thread of low priority that yields to
                 a generating reply, and a turn's retrieval on a query thread
    embedder     the embedder the app uses (the default all-MiniLM-L6-v2 GGUF, or any)
"""
