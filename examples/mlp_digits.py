"""Train an MLP on scikit-learn's digits with tapejit: the main job, as `tapejit demo` runs it.

The code lives in the package, so that `python -m tapejit demo` works from any install:
src/tapejit/tools/demo.py (about 100 lines: the model, the loss, `tj.jit` of a training step made
of `tj.value_and_grad` and a `tj.optimizers.Adam` update with a warm-up + cosine schedule).

    python examples/mlp_digits.py              # 20 epochs (~97% test accuracy)
    python examples/mlp_digits.py --quick      # a few steps: a smoke test
    python examples/mlp_digits.py --epochs 40 --lr 0.002 --batch-size 128
"""
from tapejit.tools.demo import main

if __name__ == "__main__":
    main()
