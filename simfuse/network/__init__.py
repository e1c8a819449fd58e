from .fabric import INTER, INTER_XRAIL, INTRA, SELF, Fabric, FlowGroupSpec
from .flows import FlowNetwork, max_min_rates

__all__ = ['Fabric', 'FlowGroupSpec', 'FlowNetwork', 'max_min_rates', 'SELF', 'INTRA', 'INTER', 'INTER_XRAIL']
