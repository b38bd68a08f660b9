"""Retrieval: documents and chunking (``documents``), the embedder (``embed``), the persisted index
(``index``: its SQLite database in ``chunk_db``, metadata and manifest in ``index_format``, FAISS
in ``faiss_store``, BM25 in ``lexical``, each retrieval mode's ranking in ``search_modes``, rank
fusion in ``fusion``, title links in ``title_links``; its records in ``records``), named
collections (``collection``) and the retriever the pipeline's retrieve stage searches through
(``retriever``)."""
