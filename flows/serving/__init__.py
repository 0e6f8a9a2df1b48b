"""``bctflow serve``: the HTTP query service over the workspace's live gallery (docs/serving.md)."""
