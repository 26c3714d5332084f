"""The FastAPI service: thin routes (`api.routes`) over the logic behind them (`api.services`); never the model."""
