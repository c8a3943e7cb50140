"""The patch series and its lifecycle: what each base line pins (bases: base.toml, its series, its [serving]
facts), fetching the pinned upstream artifacts (fetch), the series as data (series, diff), applying it with zero
fuzz (apply, layouts), the patch queue as git commits (queue: checkout/export), and the checks around it (check,
drift, labellock, patch_table, report, changelog)."""
