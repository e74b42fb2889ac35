"""The kwok provider's Node-making loop: the Nodes of launched NodeClaims, created once their
KWOKNodeClass's registration delay has passed. The provider (``controller/cloudprovider/kwok/``)
says when a Node is due and makes it; this loop reads the cache and queues, as every controller
does."""
