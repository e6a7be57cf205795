"""``python -m strom.native``: build the kernels now."""

from strom.native import main

main()
