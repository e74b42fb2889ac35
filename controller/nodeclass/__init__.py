"""The NodeClass status controllers: one loop per cloud's NodeClass kind (EC2NodeClass,
GCENodeClass, AKSNodeClass) that resolves each class through its provider and writes status and
``Ready``. The providers (``controller/cloudprovider/``) say what a class resolves to; these loops
read the cache and write, as every controller does."""
