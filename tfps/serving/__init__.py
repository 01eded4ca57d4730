"""`tfps serve`: TF Serving's gRPC and REST APIs for tfps SavedModels (tfps.serving.server)."""
