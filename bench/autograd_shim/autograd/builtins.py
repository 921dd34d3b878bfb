"""autograd.builtins: tapejit traces Python's own containers."""
import builtins

tuple = builtins.tuple
list = builtins.list
dict = builtins.dict
isinstance = builtins.isinstance
type = builtins.type
