"""What the API tests share."""

# The address TestClient's requests name in their Host header: one the service answers by
# default (``ServiceConfig.allowed_hosts``); TestClient's own "testserver" is refused.
LOCAL = "http://127.0.0.1"
