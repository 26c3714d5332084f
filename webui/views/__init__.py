"""One module per screen of the studio: each builds its components and holds the handlers behind them."""
