"""User transforms for the integration tests (imported inside Ray Data workers)."""


def scale_features(batch):
    batch["features"] = batch["features"] * 0.5
    return batch
