"""The JSON API (django-ninja): its routers, schemas, tokens and the resources behind them."""
