"""An in-memory inventory store with reservation support."""

from inventory.models import StockItem


class OutOfStockError(Exception):
    """Raised when a reservation asks for more units than are available."""


class InventoryStore:
    """Keeps stock items by SKU and reserves units for orders."""

    def __init__(self) -> None:
        self._items: dict[str, StockItem] = {}

    def add_item(self, item: StockItem) -> None:
        """Add or replace a stock item."""
        self._items[item.sku] = item

    def reserveUnits(self, sku: str, amount: int) -> StockItem:
        """Take ``amount`` units of ``sku`` off the shelf for an order."""
        item = self._items[sku]
        if item.quantity < amount:
            raise OutOfStockError(f"only {item.quantity} of {sku} left")
        updated = StockItem(item.sku, item.name, item.quantity - amount)
        self._items[sku] = updated
        return updated
