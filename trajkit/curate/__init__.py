"""trajkit.curate: the curation stages, from problem sets to a curriculum.

``imports`` (problem sets into ``tasks``), ``verify`` (outside completions into
``samples``), ``passk`` (k samples per task, verified, difficulty-tagged),
``dedup`` (exact + MinHash near duplicates), ``decontaminate`` (n-gram overlap
with eval sets), ``filters`` (rules and custom filters), ``splits`` (train /
held-out by cluster) and ``curriculum`` (broad and hard stages). Each is a
``StageSpec`` registered in ``trajkit.stages.REGISTRY``; ``cli.py`` exposes
them as ``trajkit curate ...``.
"""
