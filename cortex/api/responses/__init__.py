"""The Responses API: its routes (`routes.router`), runs, store upkeep and
translation. Nothing is imported here, so that the settings of a part
(`upkeep.UpkeepSettings`) come without FastAPI's routing."""
