"""Domain records of the sample inventory."""

from dataclasses import dataclass


@dataclass(frozen=True)
class StockItem:
    """One product line: a SKU, a name and how many are on the shelf."""

    sku: str
    name: str
    quantity: int

    def restocked(self, amount: int) -> "StockItem":
        """A copy with ``amount`` more units on the shelf."""
        if amount <= 0:
            raise ValueError("restock amount must be positive")
        return StockItem(self.sku, self.name, self.quantity + amount)
