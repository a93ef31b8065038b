# The package's version; the libremat it loads must say the same (rm_version, include/remat.h's RM_VERSION).
__version__ = "0.1.0"
