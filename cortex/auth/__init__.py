"""API keys, tenants and per-key rate limits (`auth` = off | required)."""
