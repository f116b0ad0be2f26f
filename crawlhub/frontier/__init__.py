"""The shared frontier: scheduler, queue, duplicate filter, request serialization."""
