"""Training and data preparation: the scripts that prepare corpora, probes and examples, train, blend and pack
models, and the shell recipes that chain them (recipes/train_default_model.sh trains the shipped encoder), plus
the evaluation recipes (eval_*.sh). Python ones run from the repository root with `python -m recipes.NAME`, shell
ones with `bash recipes/NAME.sh`. Recipes import each other (`from recipes.NAME import ...`), never bench/."""
