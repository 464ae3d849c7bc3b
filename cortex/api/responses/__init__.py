from cortex.api.responses.routes import router

__all__ = ["router"]
