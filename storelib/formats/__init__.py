"""One module per on-disk file type: its layout, sizes, name rule, decode/encode and validation."""
