"""The model export tool's parts; scripts/export_model.py is its command line
(docs/models.md). One module per concern:

    tolerances  how close an export must be to its Python reference
    text        text models: load, trace, check embeddings and classifiers
    rerank      cross-encoders: the pairs check
    image       image classifiers: fold, trace or script, check on photos
    output      the version folder, reference.json and the config draft

Setup re-exports a model when any of these files changes (scripts/setup.sh
hashes the tool and this folder).
"""
