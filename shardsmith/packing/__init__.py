"""The pack path: scan a source tree, compare it with the previous version (``delta``), turn
each original into samples in worker processes (``imaging``, ``annotated``), write shards and
commit a new version (``pipeline``, ``version``), resumably (``journal``)."""
