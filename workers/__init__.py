"""The Celery workers: the speech worker (a job's path, its engine host, supervision) and the scripts worker."""
