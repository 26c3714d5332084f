"""Job execution around the pipeline: output assembly now, the Celery app and GPU workers next."""
