"""User transforms for the integration tests (imported inside Ray Data workers)."""


def scale_features(batch):
    batch["features"] = batch["features"] * 0.5
    return batch


def slow_preprocessing(batch):
    """Preprocessing that cannot keep up: 40 ms per batch of 8 images."""
    import time

    time.sleep(0.04)
    return batch
