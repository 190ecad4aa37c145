"""How close an exported module must be to the model's own Python reference
before anything is written: apart because text, rerank and image checks and
the command line's --dtype choices all read them."""

MIN_COSINE = 0.9999
MAX_PROBABILITY_DIFF = {"fp32": 1e-4, "fp16": 1e-2}
