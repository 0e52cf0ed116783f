"""Upstream Iris's ``iris.experimental`` namespace, kept so that ``iris.experimental.iris_gluon`` imports."""
