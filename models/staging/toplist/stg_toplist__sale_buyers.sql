{#- The distinct-buyer states per product as stored (uniqCombined, sql/0016), unmerged:
    the models downstream merge them per product and over all products. -#}

select product_id, buyers from {{ source('toplist', 'sale_buyers_by_product') }}
