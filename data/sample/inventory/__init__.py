"""Inventory service (sample resource, marker: quokkasample)."""

from inventory.models import StockItem
from inventory.store import InventoryStore

__all__ = ["InventoryStore", "StockItem"]
