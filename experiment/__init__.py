"""The experiment file: one strict config model read from YAML, and the JSON Schemas generated from it."""
