"""Op wrappers. Importing tfps registers the ops (so a SavedModel with tfps tables loads after
`import tfps` alone)."""
from tfps.ops._loader import load

load()
