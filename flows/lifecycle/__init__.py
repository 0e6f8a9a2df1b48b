"""The lifecycle: what the nightly run does — retrain when something changed, then, with params
``lifecycle.policy`` set, decide what serves and carry it out (docs/design.md §7.18): the policies (a catalog), each
night's options and forecasts, the actions through the commands' own code, the crash-consistent night."""
