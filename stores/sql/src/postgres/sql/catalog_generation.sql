SELECT generation FROM rheo_catalog
