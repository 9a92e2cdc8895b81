// Anchor so every layer library has at least one translation unit.
