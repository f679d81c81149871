"""Placement: placement groups for engines, nodes for client actors, and the dry-run plan."""
