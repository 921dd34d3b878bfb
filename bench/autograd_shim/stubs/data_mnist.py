"""MNIST replaced by synthetic data of the same shapes and dtypes (no download): uint8 images
(60,000 train, 10,000 test, 28x28) of blurred random strokes, labels 0-9, seeded."""
import numpy as np


def mnist():
    rs = np.random.RandomState(0)
    def images(n):
        labels = rs.randint(0, 10, size=n).astype(np.uint8)
        base = rs.rand(10, 28, 28) > 0.8           # one pattern per class, plus noise
        noise = rs.rand(n, 28, 28) > 0.9
        return ((base[labels] ^ noise) * 255).astype(np.uint8), labels
    train_images, train_labels = images(60000)
    test_images, test_labels = images(10000)
    return train_images, train_labels, test_images, test_labels
