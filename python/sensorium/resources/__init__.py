"""Resource namespaces: ``client.files`` and ``client.models``."""

from .files import AsyncFiles, Files
from .models import AsyncModels, Models

__all__ = ["Files", "AsyncFiles", "Models", "AsyncModels"]
